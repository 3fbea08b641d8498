//go:build linux

package hub

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// fileStamp is what the kernel keeps about a file that moves whenever
// its content does: the device and inode (a replaced file is another
// inode), the size, the mtime and the ctime, which every write,
// truncation, rename or chmod sets to the current time and which no
// system call sets to anything else. ok is false when the file system
// gives no inode.
func fileStamp(fi os.FileInfo) (stamp string, ctime time.Time, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", time.Time{}, false
	}
	ctime = time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
	mtime := time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec))
	return fmt.Sprintf("rllm verified 1 dev=%d ino=%d size=%d mtime=%d ctime=%d\n", uint64(st.Dev), uint64(st.Ino), st.Size, mtime.UnixNano(), ctime.UnixNano()), ctime, true
}
