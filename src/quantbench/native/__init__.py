"""Native code the project compiles and loads: the instruction-set probe and the pinned llama.cpp.

A machine's CPU flags say what its processor implements, not what it will execute: on some
virtual machines the AMX tile instructions are advertised (and the kernel grants their
permission) yet fault when run. Native builds here therefore ask the machine, not its flags
(:mod:`quantbench.native.isa`), and record what they were built for
(:mod:`quantbench.native.llama_build`).
"""
