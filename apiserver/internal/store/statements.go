package store

import (
	"sync/atomic"

	"gorm.io/gorm"
)

// CountStatements makes the store count the SQL statements it runs
// (creates, queries, updates, deletes, raw statements; BEGIN and COMMIT are
// not counted) from now on, for benchmarks that report the database cost
// of an operation. It returns the counter.
func (s *Store) CountStatements() *atomic.Int64 {
	n := new(atomic.Int64)
	inc := func(*gorm.DB) { n.Add(1) }
	cb := s.db.Callback()
	_ = cb.Create().After("gorm:create").Register("svc:count_create", inc)
	_ = cb.Query().After("gorm:query").Register("svc:count_query", inc)
	_ = cb.Update().After("gorm:update").Register("svc:count_update", inc)
	_ = cb.Delete().After("gorm:delete").Register("svc:count_delete", inc)
	_ = cb.Row().After("gorm:row").Register("svc:count_row", inc)
	_ = cb.Raw().After("gorm:raw").Register("svc:count_raw", inc)
	return n
}
