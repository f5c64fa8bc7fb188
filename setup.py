"""verl-sglang-lora: LoRA (FSDP / Megatron) with SGLang rollouts for verl, as a plugin.

Version ranges follow docs/compatibility.md. Note: `verl[sglang]==0.9.1` cannot be installed as published
(its extra pins sglang==0.5.12, which pins transformers==5.6.0, while verl 0.9.1 excludes transformers 5.6.0);
README.md, Install, gives a recipe that works.
"""

import json
import os

from setuptools import find_packages, setup

RELEASES = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_sglang_lora", "releases.json"), encoding="utf-8"))  # the checked releases, one list

setup(
    name="verl-sglang-lora",
    version="0.1.0",
    description="Hot-swapped LoRA adapters in SGLang rollouts for verl (rollout.name=sglang_lora)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["verl_sglang_lora", "verl_sglang_lora.*"]),
    # configs/ at the top level is a link to verl_sglang_lora/configs: the overlay must live inside the package so
    # that pkg://verl_sglang_lora.configs resolves however the package is imported (installed, editable, or cwd).
    package_data={"verl_sglang_lora": ["*.json"], "verl_sglang_lora.tools": ["*.json"], "verl_sglang_lora.configs.sglang_lora": ["*.yaml"]},
    install_requires=[
        f"verl>={RELEASES['verl'][0]},<0.10",
        "torch",
        "aiohttp",
        "hydra-core>=1.3",
    ],
    extras_require={
        "test": ["pytest>=8", "pytest-asyncio", "peft", "ray[default]>=2.41", "msgspec", "pydantic>=2"],
        # The SGLang releases of releases.json (docs/compatibility.md). With the newest verl, install SGLang without its
        # transformers pin: README, Install.
        "sglang": [f"sglang>={RELEASES['sglang'][0]},<={RELEASES['sglang'][-1]}"],
        "fsdp": ["peft"],
        "megatron": ["megatron-core", "peft"],
    },
    entry_points={
        "verl.plugins": ["sglang_lora = verl_sglang_lora.register"],
        "console_scripts": ["verl-sglang-lora = verl_sglang_lora.tools.cli:main"],
    },
)
