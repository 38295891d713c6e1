# "/" opens the Utilization page at its own address (/utilization): Streamlit gives the default
# page the root URL, so the pages with real paths are never the default one.
import streamlit as st

st.switch_page("app_pages/utilization.py")
