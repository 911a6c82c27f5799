"""The agent as a component of other software (layer 5, beside the command and the chat page).

- openai_api.py: `tinyagent serve`, an OpenAI-compatible API (Starlette, served by uvicorn).
- mcp_server.py: `tinyagent mcp-server`, the agent as an MCP server (stdio or streamable HTTP).
- running.py: one question answered in a worker thread for the async servers; how many run at once.
- conversation.py: a client's chat messages as the agent's history and question.
- command.py: the two commands' options, and starting them.
"""
