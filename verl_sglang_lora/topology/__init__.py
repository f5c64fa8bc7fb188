"""SGLang topology in one YAML: slime's ``--sglang-config`` schema, validated on CPU before any GPU is
allocated, the planned placement, the actor replicas' per-group overrides, and the frozen models launched beside
the actor and found by name (:func:`model_url`). See docs/topology.md for what has and has not run on a GPU."""

from verl_sglang_lora.topology.placement import Placement, format_placement, plan_placement, summary
from verl_sglang_lora.topology.registry import model_url, model_url_async
from verl_sglang_lora.topology.schema import (
    SETTING,
    ModelSpec,
    Problem,
    ServerGroup,
    Topology,
    TopologyError,
    fields_of,
    installed_server_args_fields,
    load_topology,
    parse_topology,
    server_args_fields_from_source,
    topology_from_config,
)

__all__ = [
    "SETTING", "ModelSpec", "Placement", "Problem", "ServerGroup", "Topology", "TopologyError", "fields_of",
    "format_placement", "installed_server_args_fields", "load_topology", "model_url", "model_url_async",
    "parse_topology", "plan_placement", "server_args_fields_from_source", "summary", "topology_from_config",
]
