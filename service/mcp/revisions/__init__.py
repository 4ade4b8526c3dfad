"""What differs between protocol revisions: 2025-11-25 (-32042 and the completion notice), 2026-07-28
(InputRequiredResult and requestState), and the link for a client without URL mode."""
