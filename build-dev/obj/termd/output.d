build-dev/obj/termd/output.o: termd/output.c termd/output.h proto/util.h
termd/output.h:
proto/util.h:
