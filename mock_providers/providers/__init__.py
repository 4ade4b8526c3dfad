"""The stand-ins for third-party providers: MockHub (GitHub-like), MockGoogle, MockSlack, MockKeys."""
