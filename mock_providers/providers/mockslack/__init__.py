"""MockSlack: a Slack-like OAuth v2 provider."""
