"""The chat page (layer 5), on Gradio.

- page.py: `ChatPage` (one Agent per session, ids, limits, the queue) and `serve` (login).
- reply.py: a reply's steps as blocks, its answer, redacted.
- approval.py: the approval card (a call waiting, /approve).
- sessions.py: `SessionStore`, sessions under server-made ids, idle ones evicted.
"""
