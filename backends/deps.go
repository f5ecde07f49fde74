package backends

// Dependencies of backends being built (removed when each is in).
import (
	_ "github.com/docker/docker/client"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)
