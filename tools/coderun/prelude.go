package coderun

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
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
