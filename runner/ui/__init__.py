"""`wfrun ui`: a local, read-only web view of runs, the queue, workflows and controllers.

A layer above `runner.host` (import-linter): it reads bundles through
`runner.engine.RunReader` and the store through the host's runtime views, and is
the only package that imports the web stack (Starlette, uvicorn). See ADR 0005.
"""
