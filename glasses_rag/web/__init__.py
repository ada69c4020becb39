"""The open web: fetch policy and guarded HTTP, the SerpApi client, Google Lens images, the page reader (extraction
in a worker process) and the web cache. See docs/open-web.md."""
