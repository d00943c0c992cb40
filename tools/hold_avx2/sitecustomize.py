"""Hold a run to an AVX2-only CPU's code paths on a CPU with AVX-512 (a developer's measurement
aid, not used by the pipeline or the tests; docs/RESULTS.md, "The whole default run held to AVX2").

On ``PYTHONPATH``, this makes ``torch.cpu`` report no AVX-512 or AMX in every Python process
(quantbench's and vLLM's): vLLM then loads its ``_C_AVX2`` kernel library and its AVX2 attention,
as on an AVX2-only EPYC, and its kernel probe (quantbench.engines.vllm_kernels) finds no 4-bit
kernel. With ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` torch's own kernels are held
to AVX2 too (bf16 emulated), and a llama.cpp built with ``CC``/``CXX`` set to this folder's
``cc``/``c++`` has no AVX-512 instruction. The CPU's speed is not held: a Zen 5 core stays one."""

import importlib.abc
import importlib.machinery
import sys

_OFF = (
    "_is_avx512_supported",
    "_is_avx512_bf16_supported",
    "_is_avx512_vnni_supported",
    "_is_amx_tile_supported",
    "_is_amx_fp16_supported",
)


class _Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.cpu":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for attr in _OFF:
                if hasattr(module, attr):
                    setattr(module, attr, lambda: False)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Hold())
