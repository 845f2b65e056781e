package guestimage

import (
	"fmt"
	"io"
	"strings"
)

// cpioWriter writes the "newc" (SVR4, no CRC) cpio format the kernel
// unpacks as an initramfs: a 110-byte ASCII header per entry, the name,
// then the data, each padded to four bytes, ended by TRAILER!!!.
type cpioWriter struct {
	w     io.Writer
	ino   uint32
	err   error
	count int
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

func (c *cpioWriter) header(name string, mode uint32, size int) {
	if c.err != nil {
		return
	}
	c.ino++
	name = strings.TrimPrefix(name, "/")
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(h))
	c.write(append([]byte(name), 0))
	c.pad(110 + len(name) + 1)
	c.count++
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string, perm uint32) { c.header(name, modeDir|perm, 0) }

// File adds a regular file with content b.
func (c *cpioWriter) File(name string, perm uint32, b []byte) {
	c.header(name, modeFile|perm, len(b))
	c.write(b)
	c.pad(len(b))
}

// Symlink adds a symbolic link name -> target.
func (c *cpioWriter) Symlink(name, target string) {
	c.header(name, modeLink|0o777, len(target))
	c.write([]byte(target))
	c.pad(len(target))
}

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	c.header("TRAILER!!!", 0, 0)
	return c.err
}
