"""rtax dashboard: the router. Shared filters in the sidebar, then the chosen page, then the
footer (the database, the data's age, the rtax version and a link to the view).

Run with `streamlit run app.py` (`make run` does it, with the scheduler later). Pages live in
`pages/` and only call into `rtax` (docs/dashboard.md).
"""

import streamlit as st

from rtax.dashboard import data, filters, footer

st.set_page_config(page_title="rtax: rollout infrastructure tax", layout="wide")
filters.sidebar(data.database())
page = st.navigation(
    [
        st.Page("pages/overview.py", title="Overview", default=True),
        st.Page("pages/timeline.py", title="Timeline"),
        st.Page("pages/cold_start.py", title="Cold start"),
        st.Page("pages/paths.py", title="Paths"),
        st.Page("pages/decomposition.py", title="Decomposition"),
        st.Page("pages/amortization.py", title="Amortization"),
        st.Page("pages/projection.py", title="Projection"),
        st.Page("pages/capacity.py", title="Capacity"),
        st.Page("pages/data.py", title="Data"),
    ]
)
try:
    page.run()
finally:  # also under a page's st.stop(): the footer says which database it looked at
    footer.draw(page.url_path)
