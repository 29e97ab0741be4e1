"""Glue between harness-mem and the hosts agents run in: coding agents' hooks (:mod:`.claude_code`)."""
