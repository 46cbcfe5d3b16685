"""The SQLite store, the only package that writes SQL: the `Store` and its tables, migrations, the spool and retention."""

from rtax.store.database import Store
from rtax.store.sql import StoreError

__all__ = ["Store", "StoreError"]
