package checkpointreads

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/svc-dev/svc/apiserver/internal/hydrate"
	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/shared/objstore"
	"github.com/svc-dev/svc/shared/wire"
)

// FileEntry is one current file of the project.
type FileEntry struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// From is project-src, asset or git.
	From string `json:"from"`
}

// FilesResponse is the body of GET …/checkpoints/files.
type FilesResponse struct {
	ReadSource string      `json:"readSource"`
	Head       string      `json:"head,omitempty"`
	Files      []FileEntry `json:"files"`
	Truncated  bool        `json:"truncated,omitempty"`
}

// ReadFiles lists the project's current files (at most MaxFiles) from the
// mode's read source, which it names in h. A project with nothing in its
// read source yet has no files, not an error.
func (a *API) ReadFiles(ctx context.Context, proj store.Project, h http.Header) (FilesResponse, error) {
	src := ReadSource(proj)
	if h != nil {
		h.Set(ReadSourceHeader, src)
	}
	resp := FilesResponse{ReadSource: src, Files: []FileEntry{}}
	if src == ReadSourceS3 {
		if a.Objects == nil {
			return resp, wire.Internal(errors.New("checkpointreads: no object store"))
		}
		if err := a.s3Files(ctx, proj.ID, &resp); err != nil {
			return resp, wire.Unavailable(err)
		}
		return resp, nil
	}
	r, err := a.acquire(ctx, proj.ID, h)
	if errors.Is(errors.Unwrap(err), hydrate.ErrNotFound) || isNotFound(err) {
		return resp, nil
	}
	if err != nil {
		return resp, err
	}
	defer r.Release()
	head, _, err := headInfo(ctx, r)
	if err != nil || head == "" {
		return resp, nil
	}
	resp.Head = head
	out, err := r.Git("ls-tree", "-r", "-l", "-z", "--full-tree").AddDynamic(head).Output(ctx)
	if err != nil {
		return resp, wire.Internal(err)
	}
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 4 || f[1] != "blob" {
			continue
		}
		size, _ := strconv.ParseInt(f[3], 10, 64)
		resp.Files = append(resp.Files, FileEntry{Path: name, Size: size, From: "git"})
		if len(resp.Files) >= MaxFiles {
			resp.Truncated = true
			break
		}
	}
	return resp, nil
}

// Read sources (docs/sync-modes.md §5): S3 (project-src.tar.gz and the
// assets) is authoritative in s3 and dual_shadow, the durable .git in
// git_only. The project row decides at every request, so a mode change
// moves reads at once.
const (
	ReadSourceS3  = "s3"
	ReadSourceGit = "git"
	// ReadSourceHeader names the source of an answer.
	ReadSourceHeader = "X-Svc-Read-Source"
)

// ReadSource is the authoritative source of a project's current files.
func ReadSource(p store.Project) string {
	if p.CloudSyncMode.KeepsSourceArchive() {
		return ReadSourceS3
	}
	return ReadSourceGit
}

// s3Files lists project-src.tar.gz's regular files and the assets.
func (a *API) s3Files(ctx context.Context, projectID string, resp *FilesResponse) error {
	rc, _, err := a.Objects.Get(ctx, objstore.SourceKey(projectID))
	switch {
	case errors.Is(err, objstore.ErrNotExist):
	case err != nil:
		return err
	default:
		defer rc.Close()
		zr, err := gzip.NewReader(bufio.NewReaderSize(rc, 1<<16))
		if err != nil {
			return err
		}
		resp.Head = wire.SourceHead(zr.Header.Comment)
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			if len(resp.Files) >= MaxFiles {
				resp.Truncated = true
				break
			}
			resp.Files = append(resp.Files, FileEntry{Path: strings.TrimPrefix(h.Name, "./"), Size: h.Size, From: "project-src"})
		}
	}
	prefix := objstore.AssetKey(projectID, "")
	err = a.Objects.List(ctx, prefix, func(oi objstore.ObjectInfo) error {
		resp.Files = append(resp.Files, FileEntry{Path: strings.TrimPrefix(oi.Key, prefix), Size: oi.Size, From: "asset"})
		return nil
	})
	sort.Slice(resp.Files, func(i, j int) bool { return resp.Files[i].Path < resp.Files[j].Path })
	return err
}

func isNotFound(err error) bool {
	var ae *wire.Error
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}
