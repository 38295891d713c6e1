"""The Streamlit dashboards (`make dashboard`: `streamlit run dashboards/app.py`).

* ``app.py`` — the entry script: sign-in (OIDC or local mode), navigation, sidebar filters;
* ``app_pages/`` — one script per page; pages only draw;
* ``queries.py`` + ``sql/`` — every read, over the tables the pipelines materialize, through
  ``warehouse.kept_reader`` (a reader kept between calls) with bound parameters (no Streamlit);
* ``ui.py`` — the cached reads (TTL), the page context, what to show when there is no data;
* ``access.py`` — who sees what, from the config's ``dashboards:`` roles (no Streamlit);
* ``charts.py`` — the Altair charts (no Streamlit).

Streamlit is imported only by app.py, app_pages/ and ui.py."""
