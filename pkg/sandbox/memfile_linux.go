package sandbox

import (
	"os"

	"golang.org/x/sys/unix"
)

// newMemFile is a memfd holding b, positioned at its start.
func newMemFile(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("rllm-sandbox-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return fillMemFile(os.NewFile(uintptr(fd), name), b)
}
