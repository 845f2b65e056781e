package agentloop

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// Limits of the workspace tools.
const (
	MaxReadBytes  = 256 << 10 // read_file returns at most this much
	MaxWriteBytes = 8 << 20   // write_file refuses bigger contents
	MaxListed     = 500       // list_files entries
)

// ErrPathRefused is returned for a path outside the workspace (absolute,
// "..", through a symlink) or inside a .git directory.
var ErrPathRefused = errors.New("path refused")

// Workspace gives the tools confined access to the project's work tree:
// every operation goes through an os.Root (no escape even through a racing
// symlink), and paths are checked lexically first.
type Workspace struct {
	root *os.Root
}

// OpenWorkspace opens dir as the tools' root.
func OpenWorkspace(dir string) (*Workspace, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Workspace{root: r}, nil
}

// Close releases the root.
func (w *Workspace) Close() error { return w.root.Close() }

// Resolve checks a tool path and returns its clean, slash-separated form
// relative to the workspace ("." for the root when allowRoot).
func (w *Workspace) Resolve(p string, allowRoot bool) (string, error) {
	refuse := func(why string) (string, error) {
		return "", fmt.Errorf("%w: %q %s", ErrPathRefused, p, why)
	}
	if p == "" || p == "." || p == "./" {
		if allowRoot {
			return ".", nil
		}
		return refuse("is empty")
	}
	if strings.ContainsAny(p, "\x00\\") {
		return refuse("contains a NUL or backslash")
	}
	if strings.HasPrefix(p, "/") {
		return refuse("is absolute; use a path relative to the workspace")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return refuse(`contains ".."`)
		}
	}
	clean := path.Clean(p)
	if clean == "." {
		if allowRoot {
			return ".", nil
		}
		return refuse("names the workspace root")
	}
	parts := strings.Split(clean, "/")
	for _, part := range parts {
		if strings.EqualFold(part, ".git") {
			return refuse("is inside .git")
		}
	}
	// No component may be a symlink: a link could lead into .git or, for
	// os.Root's sake, anywhere the lexical checks cannot see.
	for i := range parts {
		fi, err := w.root.Lstat(strings.Join(parts[:i+1], "/"))
		if err != nil {
			break // does not exist (yet): nothing below it can be a link
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return refuse("goes through a symbolic link")
		}
	}
	return clean, nil
}

// toolDefs are the OpenAI function definitions of the tools.
var toolDefs = json.RawMessage(`[
{"type":"function","function":{"name":"list_files","description":"List the files of the project's workspace (recursively), below an optional directory. Paths are relative to the workspace root.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"directory relative to the workspace root; default the root"}},"additionalProperties":false}}},
{"type":"function","function":{"name":"read_file","description":"Read a text file of the workspace.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"file path relative to the workspace root"}},"required":["path"],"additionalProperties":false}}},
{"type":"function","function":{"name":"write_file","description":"Create or overwrite a file of the workspace with the given content (parent directories are created).","parameters":{"type":"object","properties":{"path":{"type":"string","description":"file path relative to the workspace root"},"content":{"type":"string","description":"the complete new content"}},"required":["path","content"],"additionalProperties":false}}},
{"type":"function","function":{"name":"delete_file","description":"Delete a file (or an empty directory) of the workspace.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"file path relative to the workspace root"}},"required":["path"],"additionalProperties":false}}}
]`)

type toolArgs struct {
	Path    *string `json:"path"`
	Content *string `json:"content"`
}

// Call runs one tool. It returns the text given back to the model and
// whether the workspace changed; a refused or failed call is a normal
// result ("error: …") so the model can correct itself.
func (w *Workspace) Call(name, arguments string) (result string, changed bool) {
	result, changed, _ = w.call(name, arguments)
	return result, changed
}

// call is Call that also returns the filesystem error of a failed call, so
// the loop can end a turn the model cannot correct (a full disk).
func (w *Workspace) call(name, arguments string) (result string, changed bool, err error) {
	var a toolArgs
	if strings.TrimSpace(arguments) != "" {
		if err := json.Unmarshal([]byte(arguments), &a); err != nil {
			return "error: arguments must be a JSON object: " + err.Error(), false, nil
		}
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	switch name {
	case "list_files":
		result, err = w.list(str(a.Path))
	case "read_file":
		result, err = w.read(str(a.Path))
	case "write_file":
		if a.Content == nil {
			return "error: content is required", false, nil
		}
		err = w.write(str(a.Path), *a.Content)
		if err == nil {
			result, changed = fmt.Sprintf("wrote %s (%d bytes)", path.Clean(str(a.Path)), len(*a.Content)), true
		}
	case "delete_file":
		err = w.delete(str(a.Path))
		if err == nil {
			result, changed = "deleted "+path.Clean(str(a.Path)), true
		}
	default:
		return fmt.Sprintf("error: unknown tool %q (tools: list_files, read_file, write_file, delete_file)", name), false, nil
	}
	if err != nil {
		return "error: " + err.Error(), false, err
	}
	return result, changed, nil
}

func (w *Workspace) list(p string) (string, error) {
	dir, err := w.Resolve(p, true)
	if err != nil {
		return "", err
	}
	var files []string
	truncated := false
	err = fs.WalkDir(w.root.FS(), dir, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if name == dir {
				return err
			}
			return nil
		}
		if d.IsDir() {
			if strings.EqualFold(d.Name(), ".git") {
				return fs.SkipDir
			}
			return nil
		}
		if len(files) >= MaxListed {
			truncated = true
			return fs.SkipAll
		}
		files = append(files, name)
		return nil
	})
	if err != nil {
		return "", cleanErr(err)
	}
	sort.Strings(files)
	out := strings.Join(files, "\n")
	if len(files) == 0 {
		out = "(no files)"
	}
	if truncated {
		out += fmt.Sprintf("\n(listing truncated at %d entries)", MaxListed)
	}
	return out, nil
}

func (w *Workspace) read(p string) (string, error) {
	name, err := w.Resolve(p, false)
	if err != nil {
		return "", err
	}
	f, err := w.root.Open(name)
	if err != nil {
		return "", cleanErr(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return "", fmt.Errorf("%s is a directory", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxReadBytes+1))
	if err != nil {
		return "", cleanErr(err)
	}
	if len(b) > MaxReadBytes {
		return string(b[:MaxReadBytes]) + fmt.Sprintf("\n(truncated at %d bytes)", MaxReadBytes), nil
	}
	return string(b), nil
}

func (w *Workspace) write(p, content string) error {
	name, err := w.Resolve(p, false)
	if err != nil {
		return err
	}
	if len(content) > MaxWriteBytes {
		return fmt.Errorf("content is larger than %d bytes", MaxWriteBytes)
	}
	if d := path.Dir(name); d != "." {
		if err := w.root.MkdirAll(d, 0o755); err != nil {
			return cleanErr(err)
		}
	}
	return cleanErr(w.root.WriteFile(name, []byte(content), 0o644))
}

func (w *Workspace) delete(p string) error {
	name, err := w.Resolve(p, false)
	if err != nil {
		return err
	}
	return cleanErr(w.root.Remove(name))
}

// cleanErr drops the absolute workspace path from filesystem errors.
func cleanErr(err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}
