"""Dashboard pages of the project package (index console, agents and API keys)."""
