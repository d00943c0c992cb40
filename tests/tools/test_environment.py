"""What the installed environment must hold for the pipeline's own tools to run at speed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from dvc.utils.serialize._yaml import parse_yaml
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]


def test_dvc_reads_its_files_with_ruamels_c_loader() -> None:
    """DVC reads dvc.lock (12,000 lines: every stage's code dependencies with their hashes) with
    ruamel.yaml's safe loader, in pure Python unless ruamel.yaml.clib is installed: 3.0 s a read
    on an AVX2-only EPYC, where `dvc status` took 8.9 s; 0.7 s and 4.7 s with it."""
    assert YAML(typ="safe").Parser.__name__ == "CParser"
    text = (REPO / "dvc.lock").read_text()
    start = time.perf_counter()
    lock = parse_yaml(text, "dvc.lock")
    seconds = time.perf_counter() - start
    assert "stages" in lock and len(lock["stages"]) >= 10
    print(f"dvc.lock ({len(text) // 1024} KiB) read in {seconds:.2f} s")


def test_loading_a_model_imports_neither_scikit_learn_nor_torchao() -> None:
    """Where scikit-learn is installed, transformers imports sklearn.metrics (and scipy.stats) at
    import time, for assisted generation we never use: 2.8 s of CPU in every process that loads a
    tokenizer or a model (10.2 against 7.4 s on a 2-core Xeon); where torchao is installed,
    transformers' quantizers, peft and accelerate import it whenever a model loads: 2.4 s more.
    Only lm-evaluation-harness (for two metrics our task does not use) and GPTQModel (for FP4/MX
    formats, inside try blocks) ask for them, so both are installed without their dependencies
    (requirements-nodeps.txt); this fails when something brings either back."""
    code = (
        "import sys\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "AutoTokenizer.from_pretrained, AutoModelForCausalLM.from_pretrained\n"
        "import transformers.quantizers.auto, peft, gptqmodel, lm_eval.evaluator\n"
        "print(sorted(m for m in ('sklearn', 'scipy.stats', 'torchao') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
