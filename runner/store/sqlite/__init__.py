"""The embedded SQLite backend: one file, WAL, FULL commits (the default store).

`SqliteStore` (store.py) is the entry point; db.py opens the file and hands out
connections, files.py inspects and creates the file on disk, schema.py holds the DDL,
and one module per table group holds its SQL.
"""
