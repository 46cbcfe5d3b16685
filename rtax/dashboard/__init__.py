"""The Streamlit dashboard's library side: cached readers, shared filters, tables and figures.

Pages (`pages/*.py`) are thin: they read through `rtax.dashboard.data`, compute through
`rtax.analysis.stats` / `rtax.planning.projection` / `rtax.dashboard.tables`, and draw
`rtax.dashboard.figures`.
"""
