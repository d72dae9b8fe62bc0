"""The CLI's runtime functions: workspaces and stores, foreground runs, launch
views, controllers and their children, source watching, dev mode, error
translation. Each command calls one of these and renders the result."""
