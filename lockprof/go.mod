module github.com/zkrwlock/rwlock/lockprof

go 1.26.8

require (
	github.com/google/pprof v0.0.0-20261016150608-1facf8f91b50
	github.com/stretchr/testify v1.12.1
	github.com/zkrwlock/rwlock v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

require (
	github.com/go-zookeeper/zk v1.0.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
)

// The lock module beside this one: lockprof is released with it.
replace github.com/zkrwlock/rwlock => ../
