package meshd_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// docRoute is one door of an API as its code declares it.
type docRoute struct {
	method, path string
	handler      string // the handler method's name
	file         string // the file that declares it, base name
}

// goPackage parses the non-test files of dir.
func goPackage(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]*ast.File{}
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range matches {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = f
	}
	return out
}

// stringConsts are the string constants the files declare, by name.
func stringConsts(files map[string]*ast.File) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
			return true
		})
	}
	return out
}

// methodFile is the file declaring method name on receiver type recv.
func methodFile(files map[string]*ast.File, recv, name string) string {
	for base, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != name || len(fd.Recv.List) == 0 {
				continue
			}
			t := fd.Recv.List[0].Type
			if star, ok := t.(*ast.StarExpr); ok {
				t = star.X
			}
			if id, ok := t.(*ast.Ident); ok && id.Name == recv {
				return base
			}
		}
	}
	return ""
}

// handlerName is the method a route's handler expression names:
// (*Plane).handleX, a.handleX, or the last argument of an adapter call
// such as localapi.Do(l, "...", a.getX).
func handlerName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.CallExpr:
		if len(x.Args) > 0 {
			return handlerName(x.Args[len(x.Args)-1])
		}
	}
	return ""
}

// constValue resolves a path expression: PathX, apitype.PathX or a literal.
func constValue(e ast.Expr, consts map[string]string) string {
	switch x := e.(type) {
	case *ast.Ident:
		return consts[x.Name]
	case *ast.SelectorExpr:
		return consts[x.Sel.Name]
	case *ast.BasicLit:
		s, _ := strconv.Unquote(x.Value)
		return s
	}
	return ""
}

func unquote(e ast.Expr) string {
	if lit, ok := e.(*ast.BasicLit); ok {
		s, _ := strconv.Unquote(lit.Value)
		return s
	}
	return ""
}

// internalRoutes are the rows of agent/control/routes.go's table.
func internalRoutes(t *testing.T) []docRoute {
	files := goPackage(t, "agent/control")
	consts := stringConsts(files)
	var out []docRoute
	ast.Inspect(files["routes.go"], func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "routes" {
			return true
		}
		for _, el := range vs.Values[0].(*ast.CompositeLit).Elts {
			row := el.(*ast.CompositeLit).Elts
			r := docRoute{method: unquote(row[0]), path: constValue(row[1], consts), handler: handlerName(row[len(row)-1])}
			r.file = methodFile(files, "Plane", r.handler)
			out = append(out, r)
		}
		return false
	})
	return out
}

// localRoutes are the rows of agent/routes.go's localRoutes; their
// handlers are methods of the agent's api type.
func localRoutes(t *testing.T) []docRoute {
	files := goPackage(t, "agent")
	consts := stringConsts(goPackage(t, "agent/apitype"))
	var out []docRoute
	ast.Inspect(files["routes.go"], func(n ast.Node) bool {
		fd, ok := n.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "localRoutes" {
			return true
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if cl.Type != nil { // the table itself, or a value such as api{a}: rows have their type elided
				return true
			}
			var r docRoute
			for _, el := range cl.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch kv.Key.(*ast.Ident).Name {
				case "Method":
					r.method = unquote(kv.Value)
				case "Path":
					r.path = constValue(kv.Value, consts)
				case "Handler":
					r.handler = handlerName(kv.Value)
				}
			}
			r.file = methodFile(files, "api", r.handler)
			out = append(out, r)
			return false
		})
		return false
	})
	return out
}

// TestRouteTablesDocumented: every door of the internal API
// (agent/control/routes.go) and of the local API (agent/routes.go) has
// exactly one row in docs/architecture.md, and that row names the file
// its handler is declared in and the handler: "file.go `handler`".
func TestRouteTablesDocumented(t *testing.T) {
	raw, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "| `") {
			cells := strings.Split(strings.Trim(l, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			rows = append(rows, cells)
		}
	}
	for api, routes := range map[string][]docRoute{"internal": internalRoutes(t), "local": localRoutes(t)} {
		if len(routes) < 10 {
			t.Fatalf("%s API: read %d routes from the code; the parser lost them", api, len(routes))
		}
		for _, r := range routes {
			if r.method == "" || r.path == "" || r.handler == "" || r.file == "" {
				t.Errorf("%s API: could not read a route from the code: %+v", api, r)
				continue
			}
			key := "`" + r.method + " " + r.path + "`"
			var found [][]string
			for _, row := range rows {
				if row[0] == key {
					found = append(found, row)
				}
			}
			want := r.file + " `" + r.handler + "`"
			switch {
			case len(found) != 1:
				t.Errorf("%s API: %d rows in docs/architecture.md for %s; want one naming %s", api, len(found), key, want)
			case !strings.HasPrefix(found[0][len(found[0])-1], want):
				t.Errorf("%s API: docs/architecture.md's row for %s names %q; the handler is %s", api, key, found[0][len(found[0])-1], want)
			}
		}
	}
}
