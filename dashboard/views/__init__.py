"""Dashboard pages. Each module is a Streamlit page script (run by `st.navigation` in
`dashboard/app.py`) with a `render()` function. May import the rest of dashboard, scoring and replay."""
