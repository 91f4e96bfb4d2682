"""gunicorn's settings shared by every way Stepwise is served (`make demo`, the Docker image, the load test):
gunicorn reads ./gunicorn.conf.py from its working directory; options on the command line win.

keepalive: an idle keep-alive connection is closed after this many seconds. gunicorn's default (2 s) is
shorter than the pause between two clicks, so a client reusing its connection right as the server closes
it gets "connection reset" (the load test saw it: 3 of 735 requests at 20 users). Closing later than a
reader pauses between clicks avoids the race; an idle connection holds no thread (gthread polls it).
"""

keepalive = 5
