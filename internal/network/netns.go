package network

import (
	"os"
	"path/filepath"
	"strings"
)

// nsPrefix starts the file name of every namespace sbx creates.
const nsPrefix = "sbx-"

// nsPath is the namespace file of sandbox id.
func (m *Manager) nsPath(id string) string { return filepath.Join(m.cfg.NetnsDir, nsPrefix+id) }

// listNamespaces returns the ids of every namespace file in dir.
func listNamespaces(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, de := range des {
		if id, ok := strings.CutPrefix(de.Name(), nsPrefix); ok && id != "" {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
