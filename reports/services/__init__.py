"""The report's services: `sections` (fill, edit, merge, restore), `findings` (verdicts, human findings),
`conversation` (comments, mentions, inbox, action items, presence), `fields` (the investigation's fields),
`activity` (one stream), `exports` (Markdown, HTML, JSON, PDF)."""
