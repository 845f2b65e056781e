//go:build !unix

package archive

import (
	"io"
	"io/fs"
	"os"
	"path"
)

// createNew creates name, which must not exist, through the root.
func (x *extractor) createNew(name string, mode fs.FileMode) (io.WriteCloser, error) {
	if err := x.mkdirAll(path.Dir(name)); err != nil {
		return nil, err
	}
	return x.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
}
