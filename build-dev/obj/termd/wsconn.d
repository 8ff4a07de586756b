build-dev/obj/termd/wsconn.o: termd/wsconn.c termd/wsconn.h proto/util.h
termd/wsconn.h:
proto/util.h:
