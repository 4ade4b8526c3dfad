"""What an operator sees: logs, metrics, tracing, audit events, flow events, redaction, health webhooks, the
observed store."""
