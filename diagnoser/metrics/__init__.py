"""Goodput accounting and planning.

timeline (audit events -> labelled intervals), goodput (ETTR, TOR, MTTF/MTTR, lemon nodes),
model (analytic E[ETTR], optimal checkpoint interval, r_f from logs), sim/ (discrete-event
simulator and recovery policies), plots (PNG), render (rich), cli (`report`, `whatif`, `simulate`).
"""
