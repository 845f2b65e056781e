package guest

import (
	"os"
	"syscall"
)

func ownerOf(fi os.FileInfo) any {
	if fi == nil {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return map[string]uint32{"uid": st.Uid, "gid": st.Gid}
	}
	return nil
}
