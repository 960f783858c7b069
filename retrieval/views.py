"""Dashboard pages of the read side."""
