"""SGLang topology in one YAML (issue 18 items 1 and 4): slime's ``--sglang-config`` schema, validated on CPU
before any GPU is allocated, and the planned placement. See docs/topology.md for what is and is not run yet."""

from verl_sglang_lora.topology.placement import Placement, format_placement, plan_placement, summary
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
    "format_placement", "installed_server_args_fields", "load_topology", "parse_topology", "plan_placement",
    "server_args_fields_from_source", "summary", "topology_from_config",
]
