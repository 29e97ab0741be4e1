"""harness-loop: an agent loop and a DAG orchestrator that keep their state in harness-mem's file."""

__all__: list[str] = []
