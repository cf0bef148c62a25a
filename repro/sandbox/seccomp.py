"""A small seccomp filter for bubblewrap's `--seccomp FD`: what namespaces alone do not stop.

The sandbox's network namespace has no interfaces, but Unix sockets that live in the file
system are reached by path, not through the network namespace: a program could connect to any
world-writable socket the read-only `/` shows (a daemon's control socket). `ptrace` lets a
program take over the sandbox's init (bwrap) and stall the run. The filter makes
`socket(AF_UNIX, ...)` fail with EACCES and `ptrace` with EPERM; `socketpair` (no path, no
peer outside) stays allowed. x32 system calls on x86-64 (numbers with bit 30 set) are refused
so they cannot be used to slip past the table. Other architectures get no filter (the
namespaces still apply); `filter_program` returns None there.

Classic BPF, written out by hand: no libseccomp binding is needed in the environment.
"""

from __future__ import annotations

import errno
import platform
import struct

# (AUDIT_ARCH, ptrace nr, socket nr) per machine
_ARCHES = {"x86_64": (0xC000003E, 101, 41), "aarch64": (0xC00000B7, 117, 198)}
_X32_BIT = 0x40000000
_AF_UNIX = 1
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
# offsets in struct seccomp_data
_NR, _ARCH, _ARG0 = 0, 4, 16


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter as bwrap reads it (an array of `struct sock_filter`), or None."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, ptrace_nr, socket_nr = arch
    deny_x32 = machine == "x86_64" or (machine is None and platform.machine() == "x86_64")
    prog = [
        _op(_LD_W_ABS, _ARCH),
        _op(_JEQ_K, audit_arch, jt=1, jf=0),
        _op(_RET_K, _RET_ALLOW),  # another ABI: left to the namespaces
        _op(_LD_W_ABS, _NR),
        _op(_JGE_K, _X32_BIT if deny_x32 else 0xFFFFFFFF, jt=5, jf=0),
        _op(_JEQ_K, ptrace_nr, jt=5, jf=0),
        _op(_JEQ_K, socket_nr, jt=0, jf=2),
        _op(_LD_W_ABS, _ARG0),
        _op(_JEQ_K, _AF_UNIX, jt=3, jf=0),
        _op(_RET_K, _RET_ALLOW),
        _op(_RET_K, _RET_ERRNO | errno.ENOSYS),  # x32
        _op(_RET_K, _RET_ERRNO | errno.EPERM),  # ptrace
        _op(_RET_K, _RET_ERRNO | errno.EACCES),  # socket(AF_UNIX)
    ]
    return b"".join(prog)
