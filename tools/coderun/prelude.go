package coderun

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/portcullis/portcullis/wire"
)

// bridgeJS is the trusted prelude: tools.call over the per-run socket.
//
//go:embed prelude/bridge.js
var bridgeJS []byte

// mainJS is the entry module. ES modules evaluate their imports in order,
// so the bridge and the typed stubs (stubs.js) are in place before the
// user's code runs, and the body runs only after the user's module
// (top-level await included) has finished.
const mainJS = `import { finish } from "./bridge.js";
import "./stubs.js";
import * as user from "./%s";
await finish(user);
`

// userFile is the user's module name; error traces name it, so it is short.
func userFile(language string) string {
	if language == LangJavaScript {
		return "code.js"
	}
	return "code.ts"
}

// writeRunDir writes the four modules into dir; stubs is stubs.js.
func writeRunDir(dir, language, code string, stubs []byte) error {
	files := map[string][]byte{
		"bridge.js":        bridgeJS,
		"stubs.js":         stubs,
		"main.js":          []byte(fmt.Sprintf(mainJS, userFile(language))),
		userFile(language): []byte(code),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o400); err != nil {
			return err
		}
	}
	return nil
}

// importMapFile is the run's import map, in the run directory.
const importMapFile = "importmap.json"

// importRefused is where the import map sends every file: URL outside the
// run directory and the grants: a directory that does not exist (under
// bwrap the root is read-only; on the host only root could make it).
const importRefused = "file:///.portcullis-import-outside-the-grants/"

// importMap is the run's import map. Deno loads local modules (JSON,
// scripts) without any read permission, outside --allow-read and even under
// --deny-read (Deno 2.9), so on the process backend an import would read any
// JSON or script file the run's user can read. The map sends every file:
// URL to importRefused, except the run directory (the prelude, stubs and the
// user's module) and the grants, which the code may read anyway; the
// longest matching prefix wins. Import maps apply to every module, data:
// modules included; a worker's entry needs read permission of its own.
func importMap(dir string, grants []wire.FSGrant) ([]byte, error) {
	imports := map[string]string{"file:///": importRefused, "/": importRefused}
	for _, p := range append([]string{dir}, grantPaths(grants)...) {
		u := (&url.URL{Scheme: "file", Path: filepath.Clean(p) + "/"}).String()
		imports[u] = u
	}
	return json.Marshal(map[string]any{"imports": imports})
}

func grantPaths(grants []wire.FSGrant) []string {
	out := make([]string, 0, len(grants))
	for _, g := range grants {
		if g.Path != "/" {
			out = append(out, g.Path)
		}
	}
	return out
}
