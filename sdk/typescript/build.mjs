// Builds dist/ (npm run build, and npm's prepare step) with the TypeScript
// compiler this package pins.
//
// npm runs prepare whenever it installs this package from source: from a
// git URL (after installing the devDependencies), and from a directory
// (`npm install /path/to/sdk/typescript`), where it does NOT install the
// devDependencies first. So when the compiler is missing, the locked
// devDependencies are installed here (npm ci, scripts off) before
// building; after that the directory builds like any checkout.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");

function npm(args) {
  // Inside an npm lifecycle script npm_execpath names the running npm.
  const cli = process.env.npm_execpath;
  const [cmd, argv] = cli && cli.endsWith(".js") ? [process.execPath, [cli, ...args]] : ["npm", args];
  execFileSync(cmd, argv, { cwd: here, stdio: ["ignore", "inherit", "inherit"] });
}

if (!existsSync(tsc)) {
  console.error("@portcullis/sdk: installing the pinned TypeScript compiler to build dist/");
  npm(["ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]);
}
execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: here, stdio: "inherit" });
