// Package gen generates gVisor state methods for a package's savable
// types; see command stategen.
package gen

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// OutputName is the generated file's name in each package.
const OutputName = "savable_gen.go"

// marker is the doc comment line that asks for state methods.
const marker = "+stateify savable"

// field is one saved field of a savable struct.
type field struct {
	// name is the field's name; an embedded field's is its type's name.
	name string
	// wait loads the field with LoadWait.
	wait bool
	// valueType, if not empty, is the type the field is saved as, through
	// the owner's save<Name> and load<Name> methods.
	valueType string
}

// savable is a struct type to generate methods for.
type savable struct {
	name       string
	fields     []field
	beforeSave bool
	afterLoad  bool
}

// Generate returns the source of the state methods for the package in
// dir, formatted.
func Generate(dir string) ([]byte, error) {
	importPath, err := importPathOf(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var (
		pkgName string
		types   []*savable
		methods = map[string]map[string]bool{} // type → method names
	)
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasSuffix(base, "_test.go") || base == OutputName {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		pkgName = f.Name.Name
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				found, err := savableTypes(fset, d)
				if err != nil {
					return nil, err
				}
				types = append(types, found...)
			case *ast.FuncDecl:
				if recv := receiverType(d); recv != "" {
					if methods[recv] == nil {
						methods[recv] = map[string]bool{}
					}
					methods[recv][d.Name.Name] = true
				}
			}
		}
	}
	if pkgName == "" {
		return nil, fmt.Errorf("no Go files in %s", dir)
	}
	for _, t := range types {
		t.beforeSave = methods[t.name]["beforeSave"]
		t.afterLoad = methods[t.name]["afterLoad"]
	}
	return render(pkgName, importPath, types)
}

// savableTypes returns the marked struct types that d declares.
func savableTypes(fset *token.FileSet, d *ast.GenDecl) ([]*savable, error) {
	if d.Tok != token.TYPE {
		return nil, nil
	}
	var out []*savable
	for _, spec := range d.Specs {
		ts := spec.(*ast.TypeSpec)
		doc := ts.Doc
		if doc == nil && len(d.Specs) == 1 {
			doc = d.Doc
		}
		if !hasMarker(doc) {
			continue
		}
		pos := fset.Position(ts.Pos())
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return nil, fmt.Errorf("%s: %s is marked %q but is not a struct", pos, ts.Name.Name, marker)
		}
		if ts.TypeParams != nil {
			return nil, fmt.Errorf("%s: %s is generic; stategen handles only plain structs", pos, ts.Name.Name)
		}
		s := &savable{name: ts.Name.Name}
		for _, f := range st.Fields.List {
			tag := ""
			if f.Tag != nil {
				unquoted, err := strconv.Unquote(f.Tag.Value)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: bad tag %s", pos, ts.Name.Name, f.Tag.Value)
				}
				tag = reflect.StructTag(unquoted).Get("state")
			}
			if tag == "nosave" {
				continue
			}
			var names []string
			for _, n := range f.Names {
				names = append(names, n.Name)
			}
			if len(names) == 0 {
				n, err := embeddedName(f.Type)
				if err != nil {
					return nil, fmt.Errorf("%s: %s: %w", pos, ts.Name.Name, err)
				}
				names = []string{n}
			}
			for _, n := range names {
				if n == "_" {
					continue
				}
				fd := field{name: n}
				switch {
				case tag == "":
				case tag == "wait":
					fd.wait = true
				case strings.HasPrefix(tag, ".(") && strings.HasSuffix(tag, ")"):
					fd.valueType = tag[2 : len(tag)-1]
				default:
					return nil, fmt.Errorf("%s: %s.%s: unknown state tag %q (want nosave, wait or .(Type))", pos, ts.Name.Name, n, tag)
				}
				s.fields = append(s.fields, fd)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func hasMarker(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		if strings.TrimSpace(strings.TrimPrefix(c.Text, "//")) == marker {
			return true
		}
	}
	return false
}

// embeddedName is the field name Go gives an embedded field of type expr.
func embeddedName(expr ast.Expr) (string, error) {
	switch e := expr.(type) {
	case *ast.Ident:
		return e.Name, nil
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name, nil
	case *ast.IndexExpr:
		return embeddedName(e.X)
	}
	return "", fmt.Errorf("cannot name embedded field of type %T", expr)
}

// receiverType is the name of d's receiver type, or "" for a function.
func receiverType(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) != 1 {
		return ""
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// importPathOf finds dir's import path from the nearest go.mod above it.
func importPathOf(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for root := dir; ; {
		if mod, err := modulePath(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, dir)
			if err != nil {
				return "", err
			}
			if rel == "." {
				return mod, nil
			}
			return mod + "/" + filepath.ToSlash(rel), nil
		} else if !os.IsNotExist(err) {
			return "", err
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		root = parent
	}
}

func modulePath(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s has no module line", goMod)
}

// render writes the methods of types.
func render(pkgName, importPath string, types []*savable) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by stategen; DO NOT EDIT.\n\npackage %s\n\n", pkgName)
	if len(types) == 0 {
		return format.Source(b.Bytes())
	}
	// The import is named so a package may have its own "state".
	b.WriteString("import (\n\t\"context\"\n\n\tsavestate \"gvisor.dev/gvisor/pkg/state\"\n)\n")
	for _, t := range types {
		r := receiverName(t.name)
		fmt.Fprintf(&b, "\n// StateTypeName implements state.Type.StateTypeName.\n")
		fmt.Fprintf(&b, "func (%s *%s) StateTypeName() string { return %q }\n", r, t.name, importPath+"."+t.name)
		fmt.Fprintf(&b, "\n// StateFields implements state.Type.StateFields.\n")
		fmt.Fprintf(&b, "func (%s *%s) StateFields() []string {\n\treturn []string{\n", r, t.name)
		for _, f := range t.fields {
			fmt.Fprintf(&b, "\t\t%q,\n", f.name)
		}
		b.WriteString("\t}\n}\n")

		fmt.Fprintf(&b, "\n// StateSave implements state.SaverLoader.StateSave.\n")
		fmt.Fprintf(&b, "func (%s *%s) StateSave(sink savestate.Sink) {\n", r, t.name)
		if t.beforeSave {
			fmt.Fprintf(&b, "\t%s.beforeSave()\n", r)
		}
		for i, f := range t.fields {
			if f.valueType != "" {
				fmt.Fprintf(&b, "\tvar %sValue %s = %s.save%s()\n", lower(f.name), f.valueType, r, upper(f.name))
				fmt.Fprintf(&b, "\tsink.SaveValue(%d, %sValue)\n", i, lower(f.name))
				continue
			}
			fmt.Fprintf(&b, "\tsink.Save(%d, &%s.%s)\n", i, r, f.name)
		}
		b.WriteString("}\n")

		fmt.Fprintf(&b, "\n// StateLoad implements state.SaverLoader.StateLoad.\n")
		ctxName := "_"
		if t.afterLoad || hasValueField(t) {
			ctxName = "ctx"
		}
		fmt.Fprintf(&b, "func (%s *%s) StateLoad(%s context.Context, source savestate.Source) {\n", r, t.name, ctxName)
		for i, f := range t.fields {
			switch {
			case f.valueType != "":
				fmt.Fprintf(&b, "\tsource.LoadValue(%d, new(%s), func(y any) { %s.load%s(ctx, y.(%s)) })\n", i, f.valueType, r, upper(f.name), f.valueType)
			case f.wait:
				fmt.Fprintf(&b, "\tsource.LoadWait(%d, &%s.%s)\n", i, r, f.name)
			default:
				fmt.Fprintf(&b, "\tsource.Load(%d, &%s.%s)\n", i, r, f.name)
			}
		}
		if t.afterLoad {
			fmt.Fprintf(&b, "\tsource.AfterLoad(func() { %s.afterLoad(ctx) })\n", r)
		}
		b.WriteString("}\n")
	}
	b.WriteString("\nfunc init() {\n")
	for _, t := range types {
		fmt.Fprintf(&b, "\tsavestate.Register((*%s)(nil))\n", t.name)
	}
	b.WriteString("}\n")
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting generated code: %w\n%s", err, b.Bytes())
	}
	return src, nil
}

func hasValueField(t *savable) bool {
	for _, f := range t.fields {
		if f.valueType != "" {
			return true
		}
	}
	return false
}

// receiverName is a short receiver for type name that no field or
// generated local can shadow.
func receiverName(name string) string {
	return "x" + upper(name)[:1]
}

func upper(s string) string {
	r := []rune(s)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

func lower(s string) string {
	r := []rune(s)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}
