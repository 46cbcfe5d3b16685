"""`rtax.toml`, read and checked: one module per table, every mistake one line naming its key and file."""
