module github.com/zkrwlock/rwlock/lockprof

go 1.25.0

require (
	github.com/google/pprof v0.0.0-20260709232956-b9395ee17fa0
	github.com/stretchr/testify v1.12.1
	github.com/zkrwlock/rwlock v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/go-zookeeper/zk v1.0.4 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
