"""The gpuledger dashboards: `streamlit run dashboards/app.py` (`make dashboard`).

Builds the navigation, signs the user in (Streamlit's OIDC when the secrets have an ``[auth]``
section; local mode with a banner otherwise), sets the shared sidebar filters and runs the page.
The app only reads: every page's data comes from gpuledger.dashboards.queries through ui's caches.
"""

import streamlit as st
from gpuledger.dashboards import access, ui

st.set_page_config(layout="wide")
st.set_option("client.toolbarMode", "viewer")  # no "Deploy" button, wherever the server was started

PAGES = [
    st.Page("app_pages/utilization.py", title="Utilization", url_path="utilization", icon=":material/monitoring:"),
    st.Page("app_pages/fair_share.py", title="Fair share", url_path="fair-share", icon=":material/balance:"),
    st.Page("app_pages/budgets.py", title="Budgets", url_path="budgets", icon=":material/savings:"),
    st.Page("app_pages/chargeback.py", title="Chargeback", url_path="chargeback", icon=":material/receipt_long:"),
    st.Page("app_pages/squatters.py", title="Squatters", url_path="squatters", icon=":material/hourglass_empty:"),
    st.Page("app_pages/my_team.py", title="My team", url_path="my-team", icon=":material/groups:"),
    st.Page("app_pages/enforcement.py", title="Enforcement", url_path="enforcement", icon=":material/gavel:"),
    st.Page("app_pages/what_if.py", title="What-if", url_path="what-if", icon=":material/science:"),
]

# The default page owns "/", so it is a redirect to /utilization, hidden from the menu. Registered
# before sign-in, so a deep link (an alert's /squatters?...) is known. Streamlit's own sidebar menu:
# one element for the browser to draw (eight page links cost it more on every load).
HOME = st.Page("app_pages/home.py", title="gpuledger", default=True, visibility="hidden")
page = st.navigation([HOME, *PAGES], position="sidebar")
# the browser tab says which page it is (title and favicon per page)
st.set_page_config(page_title=f"{page.title} · gpuledger" if page is not HOME else "gpuledger",
                   page_icon=page.icon or ":material/memory:")

ui.warm_server()  # once per server: the chart renderer's first drawing and the statement's imports are slow
auth = ui.auth_section()
local = auth is None
if not local and not st.user.get("is_logged_in", False):
    # a deep link (an alert's /squatters?cluster=…&job=…) is remembered for this browser across the
    # provider's redirect, which always comes back to "/"
    if page is not HOME:
        ui.remember_link(page.url_path, st.query_params.to_dict())
    ui.sign_in(auth)
elif not local:
    link = ui.take_link()
    by_path = {p.url_path: p for p in PAGES}
    if link is not None and link[0] in by_path and page is HOME:
        st.switch_page(by_path[link[0]], query_params=link[1])

path = ui.warehouse_path()
try:
    config = ui.load_config(path)  # the warehouse's stored config, as the CLI and the pipelines use
except Exception as exc:  # an invalid config: say which field, never a traceback  # noqa: BLE001
    st.error(f"The gpuledger config cannot be read: {exc}")
    st.stop()

state = ui.warehouse_state(path)
if not state.ready:
    st.session_state.pop(ui.CTX_KEY, None)
    ui.show_not_ready(state)
    st.stop()

email = None if local else st.user.get("email")
viewer = access.viewer_for(email, config.dashboards, state.parent_of, local=local)
st.session_state[ui.CTX_KEY] = ui.sidebar(state, viewer, local, config.policy)
if local:
    # in the sidebar, under the filters' caption: the page itself starts with its title
    st.sidebar.info("Local mode: no sign-in is configured (no `[auth]` in .streamlit/secrets.toml), so everyone "
                    "sees everything. Configure OIDC sign-in before sharing this dashboard.")
else:
    who = {"admin": "admin: sees everything", "finance": "finance: sees everything",
           "lead": f"team lead of {', '.join(viewer.led_nodes)}",
           "viewer": "org-level figures only (not a lead, admin or finance in the config)"}[viewer.role]
    st.sidebar.markdown(f"Signed in as **{email}** ({who})")
    st.sidebar.button("Log out", on_click=st.logout)

page.run()
