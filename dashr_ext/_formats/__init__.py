"""Adapters between provider chat-message formats and session events (SPEC §3.5).

Each adapter translates only: messages in become :class:`~dashr_ext._session.EventSpec`
lists, surface events out become provider messages; the session keeps the log and its folds.
"""
