module github.com/leasekeeper/leasekeeper

go 1.26
