"""Pages, one module per noun. Views stay thin: fetch through a helper that 404s, call one service or
selector, render."""
