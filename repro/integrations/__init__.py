"""The project's objectives inside other frameworks' trainers (docs/integrations.md)."""
