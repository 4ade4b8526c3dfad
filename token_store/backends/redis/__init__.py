"""The Redis backend and the Lua scripts it runs for each atomic step."""
