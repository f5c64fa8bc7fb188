"""``python -m verl_sglang_lora doctor ...`` (same as the ``verl-sglang-lora`` console script)."""

from verl_sglang_lora.tools.cli import main

raise SystemExit(main())
