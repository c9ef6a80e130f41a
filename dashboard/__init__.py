"""The Streamlit app over a run store: app.py (entry), views/ (one page each), data/ (pure data layer),
and the plumbing between them. May import scoring and replay; nothing imports dashboard.
"""
