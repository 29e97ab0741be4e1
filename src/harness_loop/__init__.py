"""harness-loop: an agent loop and a DAG orchestrator that keep their state in harness-mem's file.

A consumer of :mod:`harness_mem`: it reaches memory only through that package's public API, and
harness_mem never imports it.
"""

from .builtin_tools import WORKSPACE_SYSTEM, workspace_tools
from .chat import Message, Model, ModelOutput, ScriptedModel, ToolCall, Usage
from .consolidation_job import ConsolidationRunner
from .dag import Dag
from .errors import DagError, OrchestratorError
from .hooks import Deny, Event, HookBus, HookEvent
from .job import Backoff, Job, JobResult, RetryPolicy
from .loop import AgentLoop, BudgetExhausted, Cancelled, Done, LoopConfig, Outcome, Stuck, Unverified
from .memory import CachedGuide, MemoryGuide, MemoryWiring, attach_memory, describe_ending
from .memory_tools import memory_tools
from .openai_client import OpenAIChatModel, OpenAITextModel
from .orchestrator import JobRunner, Orchestrator
from .planner import Planner, StaticPlanner
from .record import SessionRecorder, replay
from .route import Next
from .runs import Run, RunBudget, RunReport
from .runstore import InMemoryRunStore, RunStore
from .schema import json_schema, schemas
from .states import JobState, RunState
from .subagent import SubagentSpec, SubagentStatus, run_subagent
from .tools import Tool, ToolRegistry, tool
from .workers import Worker

__all__ = [
    "AgentLoop",
    "Backoff",
    "BudgetExhausted",
    "CachedGuide",
    "Cancelled",
    "ConsolidationRunner",
    "Dag",
    "DagError",
    "Deny",
    "Done",
    "Event",
    "HookBus",
    "HookEvent",
    "InMemoryRunStore",
    "Job",
    "JobResult",
    "JobRunner",
    "JobState",
    "LoopConfig",
    "MemoryGuide",
    "MemoryWiring",
    "Message",
    "Model",
    "ModelOutput",
    "Next",
    "OpenAIChatModel",
    "OpenAITextModel",
    "Orchestrator",
    "OrchestratorError",
    "Outcome",
    "Planner",
    "RetryPolicy",
    "Run",
    "RunBudget",
    "RunReport",
    "RunState",
    "RunStore",
    "ScriptedModel",
    "SessionRecorder",
    "StaticPlanner",
    "Stuck",
    "SubagentSpec",
    "SubagentStatus",
    "Tool",
    "ToolCall",
    "ToolRegistry",
    "Unverified",
    "Usage",
    "WORKSPACE_SYSTEM",
    "Worker",
    "attach_memory",
    "describe_ending",
    "json_schema",
    "memory_tools",
    "replay",
    "run_subagent",
    "schemas",
    "tool",
    "workspace_tools",
]
