"""`vevo ui`: a live, read-only web app over run folders (server.py: HTTP and events; store.py: bounded reads
of one archive; pages.py: the views; charts.py: SVG charts; components.py: HTML pieces shared with
`vevo report`; static/: the page's one script, hand-written)."""
