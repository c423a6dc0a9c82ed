"""Local stand-ins for external services, used by the tests (no network)."""
